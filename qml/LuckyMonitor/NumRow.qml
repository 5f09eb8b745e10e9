import QtQuick
import QtQuick.Controls
import QtQuick.Layouts

// A label and one numeric field.
RowLayout {
    id: root
    property string label
    property alias text: num.text
    property alias minValue: num.minValue
    property alias maxValue: num.maxValue
    readonly property real value: num.value

    Layout.fillWidth: true
    spacing: 6

    Label {
        text: root.label
        color: Theme.dim
        Layout.preferredWidth: 84
        elide: Text.ElideRight
    }
    NumField {
        id: num
        objectName: root.objectName + "_field"
    }
}
